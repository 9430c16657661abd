"""Client state and files: the client store, run folders, checkpoints and what they record, exported clients."""
