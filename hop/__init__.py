"""The composed `hop` command line: the commands of every layer under one name."""
