"""What a run leaves behind and shows: the output files, the tables, the plot."""
