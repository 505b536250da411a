/*
 * Capture files: pcap (both byte orders, usec and nsec) and pcapng, read and
 * written by the core so that bulk encrypt/decrypt runs at C speed and is the
 * same code for PSP and EESP.
 *
 * Frames are Ethernet (with 802.1Q/802.1ad tags) or raw IP.  A transform keeps
 * every record's timestamp and metadata; frames the transform does not apply
 * to, and frames it fails on, are written back byte for byte.
 */
#ifndef PE_CAPTURE_H
#define PE_CAPTURE_H

#include <stddef.h>
#include <stdint.h>

#include "pe/link.h"
#include "pe/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pe_capture_format {
    PE_CAPTURE_PCAP = 0,    /* classic pcap, microsecond timestamps */
    PE_CAPTURE_PCAP_NSEC,   /* classic pcap, nanosecond magic */
    PE_CAPTURE_PCAPNG,
} pe_capture_format;

/* One packet record as read.  `data` stays valid until the next call on the reader. */
typedef struct pe_capture_record {
    uint32_t linktype;
    uint32_t interface_id; /* pcapng interface; 0 for pcap */
    uint64_t ts_sec;       /* seconds since the epoch */
    uint32_t ts_nsec;      /* nanoseconds within the second */
    uint32_t caplen;       /* octets present in data */
    uint32_t origlen;      /* octets on the wire */
    const uint8_t *data;
} pe_capture_record;

typedef struct pe_capture_reader pe_capture_reader;

/*
 * Readers stream: a file or descriptor reader holds a window of the input that
 * grows only to the largest record, so memory does not depend on the capture's
 * size.  A record (pcap record or pcapng block) longer than this is refused
 * with PE_ERR_CAP_RECORD_TOO_LARGE.
 */
#define PE_CAPTURE_RECORD_MAX (16u << 20)

/* Open a file; read a descriptor (a pipe, stdin, a file; not closed by the reader, read from
 * where it stands); or wrap a caller buffer (not copied; must outlive the reader). */
pe_status pe_capture_open_file(const char *path, pe_capture_reader **out);
pe_status pe_capture_open_fd(int fd, pe_capture_reader **out);
/* The same with a first window of `window` octets (16 to PE_CAPTURE_RECORD_MAX; pe_capture_open_fd: 1 MiB):
 * tests and fuzzers use small ones to exercise the refills. */
pe_status pe_capture_open_fd_window(int fd, size_t window, pe_capture_reader **out);
pe_status pe_capture_open_mem(const uint8_t *buf, size_t len, pe_capture_reader **out);
pe_capture_format pe_capture_reader_format(const pe_capture_reader *r);
/* Next packet record; non-packet pcapng blocks are skipped.  *eof = 1 and PE_OK at a clean end. */
pe_status pe_capture_next(pe_capture_reader *r, pe_capture_record *rec, int *eof);
/* Octets consumed so far, and in all when known (memory, regular files; else 0), for progress. */
uint64_t pe_capture_reader_offset(const pe_capture_reader *r);
uint64_t pe_capture_reader_size(const pe_capture_reader *r);
void pe_capture_close(pe_capture_reader *r);

/* Writing new captures (one link type, one interface), to a path or a descriptor (left open). */
typedef struct pe_capture_writer pe_capture_writer;
pe_status pe_capture_writer_open(const char *path, pe_capture_format fmt, uint32_t linktype,
                                 uint32_t snaplen, pe_capture_writer **out);
pe_status pe_capture_writer_open_fd(int fd, pe_capture_format fmt, uint32_t linktype, uint32_t snaplen,
                                    pe_capture_writer **out);
pe_status pe_capture_write(pe_capture_writer *w, uint64_t ts_sec, uint32_t ts_nsec,
                           const uint8_t *data, size_t len);
/* Flushes and closes; returns PE_ERR_CAP_IO if any write failed.  Always frees w. */
pe_status pe_capture_writer_close(pe_capture_writer *w);

/*
 * Bulk transform.  The callback gets one IP packet and either writes a new
 * packet to `out` (PE_VERDICT_TRANSFORMED), declines because the packet is not
 * for it (PE_VERDICT_PASSED, e.g. not PSP), or fails with *why set
 * (PE_VERDICT_FAILED).  The frame's L2 header is kept; its Ethertype follows
 * the new packet's IP version.
 */
typedef enum pe_verdict {
    PE_VERDICT_TRANSFORMED = 0,
    PE_VERDICT_PASSED,
    PE_VERDICT_FAILED,
} pe_verdict;

typedef pe_verdict (*pe_ip_transform_fn)(void *ctx, const uint8_t *ip, size_t ip_len, uint8_t *out,
                                         size_t out_cap, size_t *out_len, pe_status *why);

/* Called every so often with progress; return non-zero to abort the run. */
typedef int (*pe_progress_fn)(void *ctx, uint64_t bytes_done, uint64_t bytes_total, uint64_t packets);

typedef struct pe_capture_summary {
    uint64_t packets;     /* packet records read */
    uint64_t transformed; /* encrypted or decrypted */
    uint64_t passed;      /* not for this transform: written unchanged */
    uint64_t failed;      /* transform refused: written unchanged (or dropped) */
    uint64_t failed_by_status[PE_STATUS_COUNT];
    uint64_t passed_by_status[PE_STATUS_COUNT]; /* why passed, e.g. not-ip, not-udp */
    /* transformed with a note (why set with PE_VERDICT_TRANSFORMED): e.g. udp-zero-checksum, udp-bad-checksum
     * from a receiver in PE_UDP_CHECKSUM_NOTE mode, which a capture reader decrypts anyway */
    uint64_t noted_by_status[PE_STATUS_COUNT];
    uint64_t offset; /* input octets of the whole records read: where a cut (or bad) record starts */
} pe_capture_summary;

#define PE_TRANSFORM_DROP_FAILED 0x1u /* omit failed packets from the output instead of keeping them */
/* The transform may lengthen packets (encryption): an output that cannot be patched afterwards (a pipe)
 * gets a snap length no transformed packet exceeds.  See docs/captures.md, "Snap length". */
#define PE_TRANSFORM_GROWS 0x2u
#define PE_TRANSFORM_TO_PCAP 0x4u   /* write pcap (the input's resolution) whatever the input */
#define PE_TRANSFORM_TO_PCAPNG 0x8u /* write pcapng whatever the input */
#define PE_TRANSFORM_FLAGS_ALL 0xFu

/*
 * Read `in_path`, transform every IP packet, write `out_path` in the same
 * format (pcapng: every non-packet block copied, options and all) or the one
 * a TO_ flag names (pcapng to pcap refuses an interface of a second link type,
 * or a frame whose FCS length the pcap header cannot declare, with
 * PE_ERR_CAP_CONVERT).  A frame declared with an FCS gets a correct one.  The
 * input is read in chunks, so memory does not grow with its size; from a live
 * input (a pipe) each chunk is written and flushed as soon as it is done.  The summary is filled even when an error stops the run
 * part way; the output then holds every record before the one that stopped
 * it (summary->offset).  Returns PE_ERR_CAP_* for file problems
 * (PE_ERR_CAP_TRUNCATED: the input ends inside a record), PE_ERR_CAP_ABORTED
 * when the progress callback aborted the run.
 */
pe_status pe_capture_transform_file(const char *in_path, const char *out_path, pe_ip_transform_fn fn,
                                    void *fn_ctx, unsigned flags, pe_progress_fn progress,
                                    void *progress_ctx, pe_capture_summary *summary);
/* The same between descriptors (stdin to stdout, pipes); neither is closed.  A regular-file output is
 * written from where it stands. */
pe_status pe_capture_transform_fd(int in_fd, int out_fd, pe_ip_transform_fn fn, void *fn_ctx, unsigned flags,
                                  pe_progress_fn progress, void *progress_ctx, pe_capture_summary *summary);

#ifdef __cplusplus
}
#endif
#endif
