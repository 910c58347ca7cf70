def retrieval_targets():
    return []
