"""A PID that no process has, for tests of what ended processes leave behind.

Linux gives PIDs below ``pid_max``, which is at most 2**22; a just-ended child's PID, the
other choice, may have been given again by the time a test looks at it.
"""
NO_PROCESS = 2 ** 22
