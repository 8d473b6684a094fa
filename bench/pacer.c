/* The simplest correct pacer, for bench/udpmon.py: COUNT datagrams of SIZE bytes
 * to HOST:PORT, packet i due at t0 + i * SPACING_NS on CLOCK_MONOTONIC, waited
 * for by spinning on the clock, one send() per packet. No batching, no sleeping,
 * no catch-up logic: a packet late for any reason goes as soon as the spin sees
 * its time has come. The bench compares nicrig's send_paced with it, both seen by
 * the same capture.
 *
 *     cc -O2 -o pacer pacer.c && ./pacer 127.0.0.1 9000 64 10000 100000
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s HOST PORT SIZE SPACING_NS COUNT\n", argv[0]);
        return 2;
    }
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2]))};
    if (inet_pton(AF_INET, argv[1], &to.sin_addr) != 1) {
        fprintf(stderr, "pacer: bad IPv4 address %s\n", argv[1]);
        return 2;
    }
    size_t size = (size_t)atol(argv[3]);
    int64_t spacing = atoll(argv[4]);
    long count = atol(argv[5]);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&to, sizeof to) < 0) {
        perror("pacer: socket");
        return 1;
    }
    char *buf = calloc(1, size ? size : 1);
    long errors = 0;
    int64_t t0 = now_ns() + 1000000; /* first packet 1 ms from now */
    for (long i = 0; i < count; i++) {
        int64_t due = t0 + i * spacing;
        while (now_ns() < due)
            ;
        memcpy(buf, &i, size < sizeof i ? size : sizeof i);
        if (send(fd, buf, size, 0) < 0)
            errors++;
    }
    printf("sent %ld errors %ld\n", count - errors, errors);
    return 0;
}
