"""The training modes: synchronous steps, local SGD rounds, the asynchronous parameter
server.  Each is a step source or a solver of the one driver loop (:mod:`..loop`)."""
