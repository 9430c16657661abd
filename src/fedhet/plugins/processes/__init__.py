"""The processes of a run: who trains which client, how processes start, shared memory, the kept C heap."""
