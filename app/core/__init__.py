"""Cross-cutting service code: settings, errors, security, metrics."""
