"""Tracing driver work: lineage items, traced arrays, partial rewrites and @reuse, probed in the tiers."""
