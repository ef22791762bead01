"""The one cost model: memory and step time as pure functions of (model, cluster, training, layout)."""
