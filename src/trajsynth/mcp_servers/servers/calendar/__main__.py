"""``python -m trajsynth.mcp_servers.servers.calendar``: serve the calendar cluster over stdio."""

from trajsynth.mcp_servers.servers.calendar.server import main

main()
