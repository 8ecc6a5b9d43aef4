// file_replace.cpp - see file_replace.h.
#include "file_replace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "internal.h"

namespace {
constexpr size_t k_name_max = 255;  // NAME_MAX of Linux's file systems (ext4, xfs, btrfs, tmpfs)
}  // namespace

tg_status tg_file_replace_open(const char *call, const char *path, tg_file_replace *r) {
    r->target = path;
    r->f = nullptr;
    struct stat sb;
    const bool existed = stat(path, &sb) == 0;
    if (existed) {
        if (!S_ISREG(sb.st_mode)) return tg_err(TG_ERR_IO, "[%s] '%s': not a regular file", call, path);
        struct stat lb;
        if (lstat(path, &lb) == 0 && S_ISLNK(lb.st_mode)) {
            char *real = realpath(path, nullptr);
            if (!real) return tg_err(TG_ERR_IO, "[%s] '%s': cannot resolve the link: %s", call, path, strerror(errno));
            r->target = real;
            free(real);
        }
    }
    static std::atomic<unsigned> counter{0};
    const std::string suffix = ".tmp-" + std::to_string((long)getpid()) + "-" + std::to_string(counter++);
    // A name within NAME_MAX (255 bytes on Linux's file systems) of its own
    // has no room for the suffix: the temporary file then takes a short name
    // in the same directory (same file system, so the rename stays atomic).
    const size_t slash = r->target.rfind('/');
    const size_t base = slash == std::string::npos ? r->target.size() : r->target.size() - slash - 1;
    if (base > k_name_max)  // refused now, not at the rename after the whole write
        return tg_err(TG_ERR_IO, "[%s] '%s': cannot open for writing: %s", call, path, strerror(ENAMETOOLONG));
    r->tmp = base + suffix.size() <= k_name_max ? r->target + suffix
                                                : r->target.substr(0, r->target.size() - base) + ".tinygml" + suffix;
    const int fd = open(r->tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return tg_err(TG_ERR_IO, "[%s] '%s': cannot open for writing: %s", call, path, strerror(errno));
    if (existed) (void)fchmod(fd, sb.st_mode & 07777);  // the replaced file's permissions
    r->f = fdopen(fd, "wb");
    if (!r->f) {
        const int e = errno;
        close(fd);
        remove(r->tmp.c_str());
        return tg_err(TG_ERR_IO, "[%s] '%s': cannot open for writing: %s", call, path, strerror(e));
    }
    return TG_OK;
}

int tg_file_replace_finish(tg_file_replace *r, bool ok, int err) {
    if (ok && fflush(r->f) != 0) ok = false, err = errno;
    if (fclose(r->f) != 0 && ok) ok = false, err = errno;
    r->f = nullptr;
    if (ok && rename(r->tmp.c_str(), r->target.c_str()) != 0) ok = false, err = errno;
    if (!ok) remove(r->tmp.c_str());  // only the temporary file: what was at the path stays
    return ok ? 0 : err;
}
