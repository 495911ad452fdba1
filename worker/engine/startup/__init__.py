"""Loading a model to serve: the order of things, the load-time check of its numerics, and what startup says about
exactness."""
