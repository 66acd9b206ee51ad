"""Ray actors: the only place (with the driver) where Ray appears."""
