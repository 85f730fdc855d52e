"""The assistant: the policy whose behaviour becomes the data. It sees only the tools, a system
policy and the conversation; never the blueprint, the tool path or the constraints."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trajsynth.schemas import Message, MessageRole, ToolCluster

__all__ = ["Assistant"]


class Assistant(BaseModel):
    """Configuration only; ``agents.rollout`` owns the loop."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    system_prompt: str = Field(
        default=(
            "You are the customer-service assistant of {service}. {description} "
            "Use the tools to look things up and to make changes; never invent ids or values. "
            "Ask the user when you need information only they have. When you have the answer, "
            "reply to the user in plain words, stating the exact values."
        )
    )
    temperature: float | None = Field(default=None, description="None: the run's LLM setting")
    max_tokens: int | None = None
    tool_choice_after_user: str = Field(
        default="auto",
        description="tool_choice when the last message is the user's ('auto' or 'required')",
    )
    tool_choice_after_tool: str = Field(
        default="auto",
        description="tool_choice right after tool results ('auto' or 'none': answer now)",
    )

    def system_message(self, cluster: ToolCluster) -> Message:
        description = cluster.description.strip()
        if description and description[-1] not in ".!?":
            # an outside server's name and version ("MCP server memory-server 0.6.3") ran into
            # the next sentence of every system prompt
            description += "."
        text = self.system_prompt.format(service=cluster.cluster_id, description=description)
        return Message(role=MessageRole.SYSTEM, content=" ".join(text.split()))
