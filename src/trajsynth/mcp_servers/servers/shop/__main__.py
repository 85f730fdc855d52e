"""``python -m trajsynth.mcp_servers.servers.shop``: serve the shop cluster over stdio."""

from trajsynth.mcp_servers.servers.shop.server import main

main()
