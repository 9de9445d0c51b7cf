"""SAE training through sae-lens, loading/saving (SAELens format and converters), encoding, core metrics."""
