"""A client's local training: its context (load, train, upload), the runners (one by one or stacked), the local loop."""
