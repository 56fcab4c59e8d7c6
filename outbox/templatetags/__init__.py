"""Template tags of the kernel's admin pages (Django looks for them here, at the app's root)."""
