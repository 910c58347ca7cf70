def evaluation_targets():
    return []
