"""How the engine calls the run's callbacks: hook dispatch, the server step's guard, the run's callbacks and loggers."""
