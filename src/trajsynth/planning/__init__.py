"""Planning tasks: cells to sample, tool paths over a cluster's graph, values from the server's
own world, the user's words, a gold run through the acting loop, the constraints that decide
success, the planner's admission checks and the mutation lint; the held-out and RL task sets
built the same way. Planning runs the gold policy through ``agents`` (acting), so it sits above
it."""
