"""The client side: App (settings, registry, enqueue), tasks, job handles and results."""
