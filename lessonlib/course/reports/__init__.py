"""Per-notebook report modules: the plumbing a notebook's cells call so the cell shows the idea.

One module per notebook (d2l's split): table formatting, the intervals a cell compares, the
rows it picks out of a stored report. The claims themselves stay in the notebook, in the cell
that measured them; a module's printed headers pass through ``messages.say`` like the cells'.
"""
