// file_replace.h - writing a file so that a failure never destroys what was
// at its path (tg_gguf_write, models' session_state_save_file): the bytes go
// to a new file beside the target (target + ".tmp-PID-N", or ".tinygml.tmp-PID-N"
// in its directory when the target's name leaves no room for the suffix
// within 255 bytes; created exclusively, with the replaced file's permission
// bits), renamed over it
// once complete; a failure removes only that temporary file. Only a regular
// file (or nothing) is a target: opening a FIFO would wait for a reader, and
// a device or a directory is never replaced. A symbolic link is followed
// (its target is written, the link stays).
#pragma once
#include <cstdio>
#include <string>

#include "tinygml.h"

struct tg_file_replace {
    std::string target, tmp;
    FILE *f = nullptr;
};

// Opens r->f for writing. Errors: TG_ERR_IO "[call] 'path': not a regular
// file / cannot resolve the link / cannot open for writing: ...".
tg_status tg_file_replace_open(const char *call, const char *path, tg_file_replace *r);

// Closes r->f; when ok (the writes succeeded) renames the temporary file over
// the target, otherwise, or when the close or the rename fails, removes it.
// Returns 0, or err (ok false) or the errno of the close or rename that failed.
int tg_file_replace_finish(tg_file_replace *r, bool ok, int err);
