//! Async Swank client: framing, request ids, events, interrupts. Knows nothing about MCP.
