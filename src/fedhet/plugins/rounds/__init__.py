"""The round loop and what it composes each round: the trainer, its option groups, sampling, metrics, new clients."""
