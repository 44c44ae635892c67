# C declarations for the aesni backend: the intrinsics files (aesni_ctr.h, aesni_gcm.h, aesni_probe.h), and the few pthread calls and
# GCC atomic builtins the Cython module uses to split large inputs across threads.

from libc.stdint cimport uint8_t, uint32_t, uint64_t


cdef extern from "aesni_ctr.h" nogil:
    ctypedef enum ks_status:
        KS_OK
        KS_ERR_NULL
        KS_ERR_KEY_SIZE
        KS_ERR_KEY_STATE
        KS_ERR_ISA
        KS_ERR_RANGE
        KS_ERR_TAG

    ctypedef enum ks_isa:
        KS_ISA_NONE
        KS_ISA_AESNI
        KS_ISA_VAES256
        KS_ISA_VAES512

    ctypedef enum ks_store:
        KS_STORE_CACHED
        KS_STORE_STREAM

    enum:
        KS_BLOCK_SIZE
        KS_MAX_ROUNDS

    ctypedef struct ks_aes_key:
        uint8_t round_keys[240]
        uint32_t rounds

    unsigned ks_cpu_isas()
    ks_status ks_expand_key(const uint8_t *key, size_t key_len, ks_aes_key *out)
    ks_status ks_ctr_xor(const ks_aes_key *key, ks_isa isa, const uint8_t *initial_counter,
                         uint64_t offset, const uint8_t *src, uint8_t *dst, size_t length, ks_store store)
    void ks_wipe_key(ks_aes_key *key)


cdef extern from "aesni_gcm.h" nogil:
    enum:
        KS_GCM_NONCE_SIZE
        KS_GCM_TAG_SIZE

    ctypedef struct ks_ghash_key:
        pass

    ctypedef struct ks_gcm_key:
        pass

    unsigned ks_gcm_cpu_isas()
    int ks_gcm_xmm_vex()
    ks_status ks_ghash_init(const uint8_t *h, ks_ghash_key *out)
    ks_status ks_gcm_init(const uint8_t *key, size_t key_len, ks_gcm_key *out)
    ks_status ks_ghash(const ks_ghash_key *key, ks_isa isa, const uint8_t *aad, size_t aad_len,
                       const uint8_t *data, size_t length, uint8_t *out)
    ks_status ks_gcm_seal(const ks_gcm_key *key, ks_isa isa, const uint8_t *nonce, const uint8_t *aad,
                          size_t aad_len, const uint8_t *src, uint8_t *dst, size_t length, uint8_t *tag)
    ks_status ks_gcm_open(const ks_gcm_key *key, ks_isa isa, const uint8_t *nonce, const uint8_t *aad,
                          size_t aad_len, const uint8_t *src, uint8_t *dst, size_t length, const uint8_t *tag)
    ctypedef struct ks_gcm_seal_state:
        pass

    ks_status ks_gcm_seal_start(ks_gcm_seal_state *state, const ks_gcm_key *key, ks_isa isa, const uint8_t *nonce,
                                const uint8_t *aad, size_t aad_len)
    ks_status ks_gcm_seal_update(ks_gcm_seal_state *state, const ks_gcm_key *key, ks_isa isa, const uint8_t *src,
                                 uint8_t *dst, size_t length)
    ks_status ks_gcm_seal_finish(ks_gcm_seal_state *state, const ks_gcm_key *key, uint8_t *tag)
    void ks_gcm_seal_wipe(ks_gcm_seal_state *state)
    void ks_gcm_wipe(ks_gcm_key *key)
    void ks_ghash_wipe(ks_ghash_key *key)


cdef extern from "aesni_probe.h" nogil:
    ks_status ks_probe_aes128(ks_isa isa, uint64_t iterations, uint64_t *blocks, uint8_t *sink)
    ks_status ks_probe_clmul(ks_isa isa, uint64_t iterations, uint64_t *blocks, uint8_t *sink)


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_t:
        pass
    ctypedef struct pthread_attr_t:
        pass
    int pthread_attr_init(pthread_attr_t *attr)
    int pthread_attr_setstacksize(pthread_attr_t *attr, size_t stacksize)
    int pthread_attr_destroy(pthread_attr_t *attr)
    int pthread_create(pthread_t *thread, const pthread_attr_t *attr,
                       void *(*start_routine)(void *) noexcept nogil, void *arg)
    int pthread_join(pthread_t thread, void **retval)
    int pthread_attr_setdetachstate(pthread_attr_t *attr, int detachstate)
    enum:
        PTHREAD_CREATE_DETACHED


cdef extern from "<sched.h>" nogil:
    int sched_yield()


cdef extern from *:
    # GCC/Clang builtins (generic in the pointer type; declared here for size_t counters).
    enum:
        __ATOMIC_RELAXED
        __ATOMIC_ACQUIRE
        __ATOMIC_RELEASE
        __ATOMIC_ACQ_REL
    size_t __atomic_fetch_add(size_t *pointer, size_t value, int memory_order) nogil
    size_t __atomic_sub_fetch(size_t *pointer, size_t value, int memory_order) nogil
    size_t __atomic_load_n(size_t *pointer, int memory_order) nogil
    void __atomic_store_n(int *pointer, int value, int memory_order) nogil
