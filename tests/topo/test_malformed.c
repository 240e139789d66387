/*
 * Bad topology files: each gives a clear one-line error naming the file, a precise status,
 * and no topology — never a crash.
 */
#include "topo/topo.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

static char tmpdir[256];

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/strata-test-malformed-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[300];

    (void)state;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd);
}

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *file = fopen(path, "wb");

    assert_non_null(file);
    assert_int_equal(fwrite(data, 1, size, file), size);
    assert_int_equal(fclose(file), 0);
}

/* Load path; expect status, an error naming the file that contains `needle`, one line. */
static void expect_failure(const char *path, strata_status_t status, const char *needle)
{
    char err[UTIL_REASON_LEN] = "";
    topo_t *topo = (topo_t *)(uintptr_t)0x1;

    assert_int_equal(topo_load_file(path, &topo, err), status);
    assert_ptr_equal(topo, (topo_t *)(uintptr_t)0x1); /* output untouched on failure */
    if (strstr(err, path) == NULL || strstr(err, needle) == NULL || strchr(err, '\n')) {
        fail_msg("error for %s: '%s' (wanted '%s')", path, err, needle);
    }
}

static void expect_text_failure(const char *name, const char *text, const char *needle)
{
    char path[512];

    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    write_file(path, text, strlen(text));
    expect_failure(path, STRATA_ERR_PARSE, needle);
}

static void test_missing(void **state)
{
    char path[512];

    (void)state;
    snprintf(path, sizeof(path), "%s/does-not-exist.xml", tmpdir);
    expect_failure(path, STRATA_ERR_NOT_FOUND, "No such file");
}

static void test_directory(void **state)
{
    (void)state;
    expect_failure(tmpdir, STRATA_ERR_IO, "not a regular file");
}

static void test_empty(void **state)
{
    (void)state;
    expect_text_failure("empty.xml", "", "empty file");
}

static void test_binary(void **state)
{
    static const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0};
    char path[512];

    (void)state;
    snprintf(path, sizeof(path), "%s/binary.xml", tmpdir);
    write_file(path, elf, sizeof(elf));
    expect_failure(path, STRATA_ERR_PARSE, "binary data");
}

static void test_not_xml(void **state)
{
    (void)state;
    expect_text_failure("notes.txt", "GPU0 -> mlx5_0\nGPU1 -> mlx5_1\n",
                        "malformed or truncated XML");
}

static void truncate_fixture(const char *fixture, const char *name)
{
    char src[512], dst[512], buf[65536];
    size_t size;
    FILE *file;

    snprintf(src, sizeof(src), "%s/%s", STRATA_TEST_FIXTURES, fixture);
    file = fopen(src, "rb");
    assert_non_null(file);
    size = fread(buf, 1, sizeof(buf), file);
    fclose(file);
    assert_true(size > 100);
    snprintf(dst, sizeof(dst), "%s/%s", tmpdir, name);
    write_file(dst, buf, size / 2);
    expect_failure(dst, STRATA_ERR_PARSE, "malformed or truncated XML");
}

static void test_truncated(void **state)
{
    (void)state;
    truncate_fixture("nvswitch-8gpu-8nic.nccl.xml", "truncated.nccl.xml");
    truncate_fixture("shared-4nic-8gpu.hwloc.xml", "truncated.hwloc.xml");
}

static void test_unbalanced_tags(void **state)
{
    (void)state;
    expect_text_failure("unbalanced.xml",
                        "<system version=\"1\">\n  <cpu numaid=\"0\">\n  </pci>\n</system>\n",
                        ":3: malformed or truncated XML");
}

static void test_not_topology(void **state)
{
    (void)state;
    expect_text_failure("page.xml", "<html><body>hello</body></html>",
                        "not a topology file: root element is <html>");
}

static void test_nccl_semantic_errors(void **state)
{
    (void)state;
    expect_text_failure("no-cpu.xml", "<system version=\"1\"></system>", "has no <cpu>");
    expect_text_failure("no-numaid.xml", "<system>\n<cpu affinity=\"ff\"/>\n</system>",
                        ":2: <cpu> has no numaid");
    expect_text_failure("bad-numaid.xml", "<system><cpu numaid=\"zero\"/></system>",
                        "malformed numaid 'zero'");
    /* a character reference puts a newline in the value; the message stays one line */
    expect_text_failure("newline-numaid.xml", "<system><cpu numaid=\"1&#10;2\"/></system>",
                        "malformed numaid '1?2'");
    expect_text_failure("bad-affinity.xml",
                        "<system><cpu numaid=\"0\" affinity=\"00ff,xyz\"/></system>",
                        "malformed affinity mask '00ff,xyz'");
    expect_text_failure("no-busid.xml",
                        "<system><cpu numaid=\"0\">\n\n<pci class=\"0x030200\"/></cpu></system>",
                        ":3: <pci> has no busid");
    expect_text_failure("bad-busid.xml",
                        "<system><cpu numaid=\"0\"><pci busid=\"gpu0\" class=\"0x030200\"/>"
                        "</cpu></system>",
                        "busid that is not a PCI address: 'gpu0'");
    expect_text_failure("bad-class.xml",
                        "<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0xZZ\"/>"
                        "</cpu></system>",
                        "malformed class '0xZZ'");
    expect_text_failure("bad-speed.xml",
                        "<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x020700\">"
                        "<nic><net name=\"mlx5_0\" speed=\"fast\"/></nic></pci></cpu></system>",
                        "<net> has a malformed speed 'fast'");
    expect_text_failure("gpu-twice.xml",
                        "<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x030200\"/>"
                        "\n<pci busid=\"0000:01:00.0\" class=\"0x030200\"/></cpu></system>",
                        ":2: <pci> has the busid of another GPU: '0000:01:00.0'");
    /* Link figures: finite, 0 or more, within bounds (a huge one broke --json) */
    static const struct {
        const char *speed, *width, *needle;
    } links[] = {
        {"1e308", "16", "link_speed '1e308' is not a speed of 0 to 1024 GT/s"},
        {"nan", "16", "link_speed 'nan' is not a speed"},
        {"inf GT/s", "16", "link_speed 'inf GT/s' is not a speed"},
        {"-16 GT/s", "16", "link_speed '-16 GT/s' is not a speed"},
        {"16 GT/s", "-16", "link_width '-16' is not a lane count of 0 to 64"},
        {"16 GT/s", "4294967312", "link_width '4294967312' is not a lane count"},
        {"16 GT/s", "2.5", "link_width '2.5' is not a lane count"},
    };
    for (size_t i = 0; i < sizeof(links) / sizeof(links[0]); ++i) {
        char text[512];

        snprintf(text, sizeof(text), "<system><cpu numaid=\"0\">\n<pci busid=\"0000:01:00.0\" "
                 "class=\"0x030200\" link_speed=\"%s\" link_width=\"%s\"/></cpu></system>",
                 links[i].speed, links[i].width);
        expect_text_failure("bad-link.xml", text, links[i].needle);
    }
    /* Counts past what their fields hold are refused, not cut to fit */
    expect_text_failure("nvlink-count.xml",
                        "<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x030200\">"
                        "<gpu dev=\"0\" sm=\"90\"><nvlink target=\"0000:02:00.0\" "
                        "count=\"4294967314\"/></gpu></pci></cpu></system>",
                        "<nvlink> has a count above 1024 '4294967314'");
    expect_text_failure("vendor.xml",
                        "<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x030200\" "
                        "vendor=\"0x110de\"/></cpu></system>",
                        "<pci> has a vendor above 65535 '0x110de'");
    expect_text_failure("nic-speed.xml",
                        "<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x020700\">"
                        "<nic><net name=\"mlx5_0\" speed=\"100000000000000000000\"/></nic></pci></cpu>"
                        "</system>",
                        "<net> has a malformed speed");
    expect_text_failure("nic-speed-large.xml",
                        "<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x020700\">"
                        "<nic><net name=\"mlx5_0\" speed=\"1000000000\"/></nic></pci></cpu>"
                        "</system>",
                        "<net> has a speed above 100000000 '1000000000'");
    expect_text_failure("nvlink-no-target.xml",
                        "<system><cpu numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x030200\">"
                        "<gpu dev=\"0\" sm=\"90\"><nvlink count=\"18\"/></gpu></pci></cpu></system>",
                        "<nvlink> has no target");
}

static void test_hwloc_semantic_errors(void **state)
{
    (void)state;
    expect_text_failure("future.hwloc.xml",
                        "<topology version=\"4.0\"><object type=\"Machine\"/></topology>",
                        "hwloc XML format 4 is newer than strata can read");
    expect_text_failure("banana.hwloc.xml",
                        "<topology version=\"2.0\"><object type=\"Banana\" os_index=\"0\"/>"
                        "</topology>",
                        ":1: invalid hwloc XML: unknown object type 'Banana'");
}

/*
 * An encoding error that libxml2 reports outside any parser context, in a file read after an
 * hwloc XML import (found by fuzz_topo_xml): hwloc had pointed libxml2's error handler into
 * its plugin, then unloaded it, and the report jumped into unmapped memory.
 */
static void test_encoding_error_after_hwloc(void **state)
{
    static const char utf7[] = "<?xml version=\"1.0\" encoding=\"UTF-7\"?>\n"
                               "<topology>\xff\xfe\x92\x90</topology>\n";
    char path[512], err[UTIL_REASON_LEN];
    topo_t *topo;

    (void)state;
    snprintf(path, sizeof(path), "%s/no-gpu-no-nic.hwloc.xml", STRATA_TEST_FIXTURES);
    for (int i = 0; i < 2; ++i) {
        assert_int_equal(topo_load_file(path, &topo, err), STRATA_OK);
        topo_destroy(topo);
        expect_text_failure("utf7.xml", utf7, "malformed or truncated XML");
    }
}

/* hwloc takes two PCI devices at one address; strata refuses two GPUs there. */
static void test_hwloc_gpu_twice(void **state)
{
    static const char second[] = "          <object type=\"PCIDev\" gp_index=\"70\" "
                                 "pci_busid=\"0000:01:00.0\" "
                                 "pci_type=\"0302 [10de:20b0] [10de:134f] a1\"/>\n";
    char path[512], doc[16384], *at;
    size_t size, head;
    FILE *file;

    (void)state;
    snprintf(path, sizeof(path), "%s/hostile/ok-base.hwloc.xml", STRATA_TEST_FIXTURES);
    file = fopen(path, "rb");
    assert_non_null(file);
    size = fread(doc, 1, sizeof(doc) - sizeof(second), file);
    fclose(file);
    doc[size] = '\0';
    at = strstr(doc, "osdev_type=\"5\"/>\n          </object>\n");
    assert_non_null(at);
    head = (size_t)(at - doc) + strlen("osdev_type=\"5\"/>\n          </object>\n");
    memmove(doc + head + strlen(second), doc + head, size - head + 1);
    memcpy(doc + head, second, strlen(second));
    expect_text_failure("gpu-twice.hwloc.xml", doc, ": two GPUs at PCI bus id 0000:01:00.0");
}

static void test_buffer_and_arguments(void **state)
{
    char err[UTIL_REASON_LEN];
    topo_t *topo = NULL;

    (void)state;
    assert_int_equal(topo_load_file("", &topo, err), STRATA_ERR_INVALID);
    assert_int_equal(topo_load_file(NULL, &topo, err), STRATA_ERR_INVALID);
    assert_int_equal(topo_load_buffer("empty", "", 0, &topo, err), STRATA_ERR_PARSE);
    assert_null(topo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_missing),
        cmocka_unit_test(test_directory),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_binary),
        cmocka_unit_test(test_not_xml),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_unbalanced_tags),
        cmocka_unit_test(test_not_topology),
        cmocka_unit_test(test_nccl_semantic_errors),
        cmocka_unit_test(test_hwloc_semantic_errors),
        cmocka_unit_test(test_encoding_error_after_hwloc),
        cmocka_unit_test(test_hwloc_gpu_twice),
        cmocka_unit_test(test_buffer_and_arguments),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
