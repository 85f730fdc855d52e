"""``python -m trajsynth.mcp_servers.servers.travel``: serve the travel cluster over stdio."""

from trajsynth.mcp_servers.servers.travel.server import main

main()
