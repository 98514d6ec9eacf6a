"""A broker's own trace: the `hops` recorder inside the broker process, the writer
process that turns its blobs into Arrow files, and the trace schema they write.

It lives in the broker layer because a broker records every routing decision it makes;
the readers of traces (replay clients, the Spark analysis) sit above it in `monitor`.
"""
