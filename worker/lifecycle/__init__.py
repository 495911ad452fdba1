"""The worker's life under a pool manager: bind, load, announce, serve, shut down."""
