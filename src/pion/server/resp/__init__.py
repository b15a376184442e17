"""Sans-I/O RESP: request frames in (hiredis), reply values out. Never touches a socket."""
