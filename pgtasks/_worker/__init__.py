"""Worker and beat processes: the claim loop, its round trips, shutdown and background services."""
