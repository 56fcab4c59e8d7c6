"""What this project's apps share and no one of them owns: argparse types for their commands, and
how their admin pages show a link to another app's page or a place. Not the kernel's: the kernel
ships to other projects, and these are this one's."""
