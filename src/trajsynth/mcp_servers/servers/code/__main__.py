"""``python -m trajsynth.mcp_servers.servers.code``: serve the code cluster over stdio."""

from trajsynth.mcp_servers.servers.code.server import main

main()
