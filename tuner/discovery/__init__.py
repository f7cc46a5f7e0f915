"""Discovery: the program's dispatches as the compiler configures them, the function that runs each, and what it takes."""
