"""The constraint problem of a dispatch: where its valid configs come from (this tuner's problems, the compiler's), and the two compared."""
