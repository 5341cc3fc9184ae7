/*
 * list.h - intrusive doubly linked lists and singly linked queues.
 *
 * The link lives inside the object (no allocation to enqueue), so putting an object on a
 * list can never fail; this is what the fast path needs.  A list head is a fy_list_t whose
 * prev/next point to itself when empty.
 */
#ifndef FY_UTIL_LIST_H
#define FY_UTIL_LIST_H

#include <stddef.h>

#define fy_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

typedef struct fy_list {
    struct fy_list *prev, *next;
} fy_list_t;

static inline void fy_list_init(fy_list_t *head)
{
    head->prev = head->next = head;
}
static inline int fy_list_is_empty(const fy_list_t *head)
{
    return head->next == head;
}

static inline void fy_list_insert_between(fy_list_t *e, fy_list_t *prev, fy_list_t *next)
{
    e->prev = prev;
    e->next = next;
    prev->next = e;
    next->prev = e;
}
static inline void fy_list_add_tail(fy_list_t *head, fy_list_t *e)
{
    fy_list_insert_between(e, head->prev, head);
}
static inline void fy_list_add_head(fy_list_t *head, fy_list_t *e)
{
    fy_list_insert_between(e, head, head->next);
}
/* Unlink e; e is left self-linked so a second del is harmless. */
static inline void fy_list_del(fy_list_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = e;
}
static inline int fy_list_is_linked(const fy_list_t *e)
{
    return e->next != e;
}
static inline fy_list_t *fy_list_pop_head(fy_list_t *head)
{
    fy_list_t *e = head->next;
    if (e == head)
        return NULL;
    fy_list_del(e);
    return e;
}
static inline size_t fy_list_length(const fy_list_t *head)
{
    size_t n = 0;
    for (const fy_list_t *e = head->next; e != head; e = e->next)
        n++;
    return n;
}

#define fy_list_for_each(pos, head) for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)
/* Safe against removal of pos during the walk. */
#define fy_list_for_each_safe(pos, tmp, head)                                                      \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);                               \
         (pos) = (tmp), (tmp) = (pos)->next)

/* A singly linked FIFO queue: O(1) push at tail, pop at head. */
typedef struct fy_qelem {
    struct fy_qelem *next;
} fy_qelem_t;

typedef struct fy_queue {
    fy_qelem_t *head;
    fy_qelem_t **ptail;
} fy_queue_t;

static inline void fy_queue_init(fy_queue_t *q)
{
    q->head = NULL;
    q->ptail = &q->head;
}
static inline int fy_queue_is_empty(const fy_queue_t *q)
{
    return q->head == NULL;
}
static inline void fy_queue_push(fy_queue_t *q, fy_qelem_t *e)
{
    e->next = NULL;
    *q->ptail = e;
    q->ptail = &e->next;
}
static inline void fy_queue_push_head(fy_queue_t *q, fy_qelem_t *e)
{
    e->next = q->head;
    if (q->head == NULL)
        q->ptail = &e->next;
    q->head = e;
}
static inline fy_qelem_t *fy_queue_pop(fy_queue_t *q)
{
    fy_qelem_t *e = q->head;
    if (e != NULL) {
        q->head = e->next;
        if (q->head == NULL)
            q->ptail = &q->head;
    }
    return e;
}
static inline fy_qelem_t *fy_queue_peek(const fy_queue_t *q)
{
    return q->head;
}

#endif
