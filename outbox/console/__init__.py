"""What operators and readers look at, drawn from the code.

A correlation's timeline and sequence diagram, the choreography map, the SVG they are drawn
with, the dead-letter actions (replay, discard) behind the admin's buttons, and the AsyncAPI
document. It reads the core; `outbox.admin` (at the app's root, where Django looks) shows it.
"""
