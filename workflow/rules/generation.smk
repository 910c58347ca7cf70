def generation_targets():
    return []
