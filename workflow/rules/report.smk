def report_targets():
    return []
