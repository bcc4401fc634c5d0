"""gRPC front end: servicers (no business logic), status mapping, the server builder."""
