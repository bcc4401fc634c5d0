"""The sepp server: config, engine, committer-backed store, gRPC and HTTP front ends."""
