"""The data stage: raw files -> canonical Parquet (loaders, prepare, pooled corpora, downloads, schema, table serialization, exports)."""
