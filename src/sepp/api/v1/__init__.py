"""Generated gRPC/protobuf code for sepp. Do not edit; run scripts/gen_protos.py."""
