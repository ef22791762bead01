"""Model and GPU catalogs: presets on disk become ModelSpec and GpuSpec."""
