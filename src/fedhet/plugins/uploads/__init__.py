"""What the server does with the uploads: checks and failure budget, aggregation, private updates."""
