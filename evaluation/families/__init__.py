"""SAE families (issue 36): matching features across SAEs of one hook, functional agreement, splitting, stability."""
