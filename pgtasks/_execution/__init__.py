"""Running claimed jobs: executors (threads, event loop, process pool), watchdogs, outcomes."""
