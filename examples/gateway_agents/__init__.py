"""Agent programs trained through the gateway (docs/gateway.md); they import only `openai`."""
