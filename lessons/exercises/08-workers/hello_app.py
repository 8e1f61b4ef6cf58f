"""The app exercise 8's workers load when they boot: the greeting they answer with.

Break it (a syntax error, a ``raise`` at the top) while the server runs, then kill a worker:
its replacement cannot boot, and a master that does the exercise stops with status 3.
"""

GREETING = "hello"
