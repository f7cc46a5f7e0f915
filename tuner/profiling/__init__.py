"""Where a program's time goes, dispatch by dispatch (the compiler side, and the runtime half that times)."""
