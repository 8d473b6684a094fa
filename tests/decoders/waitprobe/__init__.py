'''
Test-only decoder: runs a scripted sequence of wait() calls and annotates
what each returned, so that nicrig's builtin engine can be compared with
libsigrokdecode on the semantics of wait() itself.
'''

from .pd import Decoder
