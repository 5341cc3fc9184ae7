/*
 * test_list.c - intrusive lists and queues: order, unlinking anywhere, safe iteration with
 * removal, and the self-linked state that makes a second del harmless.
 */
#include "fytest.h"
#include "util/list.h"

typedef struct item {
    int v;
    fy_list_t link;
    fy_qelem_t q;
} item_t;

static void expect_order(fy_list_t *head, const int *vals, size_t n)
{
    fy_list_t *e;
    size_t i = 0;
    FY_ASSERT_EQ(fy_list_length(head), n);
    fy_list_for_each(e, head)
    {
        FY_ASSERT_LT(i, n);
        FY_ASSERT_EQ(fy_container_of(e, item_t, link)->v, vals[i]);
        i++;
    }
    FY_ASSERT_EQ(i, n);
    /* Backwards too: prev pointers agree. */
    for (e = head->prev; e != head; e = e->prev)
        FY_ASSERT_EQ(fy_container_of(e, item_t, link)->v, vals[--i]);
}

static void list_basic(void)
{
    fy_list_t head;
    item_t it[5];
    fy_list_init(&head);
    FY_ASSERT(fy_list_is_empty(&head));
    FY_ASSERT(fy_list_pop_head(&head) == NULL);
    for (int i = 0; i < 5; i++) {
        it[i].v = i;
        fy_list_init(&it[i].link);
        FY_ASSERT(!fy_list_is_linked(&it[i].link));
    }
    fy_list_add_tail(&head, &it[1].link);
    fy_list_add_tail(&head, &it[2].link);
    fy_list_add_head(&head, &it[0].link);
    fy_list_add_tail(&head, &it[3].link);
    FY_ASSERT(!fy_list_is_empty(&head));
    FY_ASSERT(fy_list_is_linked(&it[2].link));
    expect_order(&head, (const int[]){0, 1, 2, 3}, 4);

    fy_list_del(&it[2].link); /* middle */
    FY_ASSERT(!fy_list_is_linked(&it[2].link));
    fy_list_del(&it[2].link); /* again: harmless */
    expect_order(&head, (const int[]){0, 1, 3}, 3);
    fy_list_del(&it[3].link); /* tail */
    fy_list_del(&it[0].link); /* head */
    expect_order(&head, (const int[]){1}, 1);

    fy_list_t *e = fy_list_pop_head(&head);
    FY_ASSERT(e == &it[1].link);
    FY_ASSERT(!fy_list_is_linked(e));
    FY_ASSERT(fy_list_is_empty(&head));
    FY_ASSERT_EQ(fy_list_length(&head), 0);
}

static void list_safe_removal(void)
{
    fy_list_t head, *pos, *tmp;
    item_t it[10];
    fy_list_init(&head);
    for (int i = 0; i < 10; i++) {
        it[i].v = i;
        fy_list_add_tail(&head, &it[i].link);
    }
    /* Remove the odd ones while walking. */
    fy_list_for_each_safe(pos, tmp, &head)
    {
        if (fy_container_of(pos, item_t, link)->v % 2)
            fy_list_del(pos);
    }
    expect_order(&head, (const int[]){0, 2, 4, 6, 8}, 5);
    fy_list_for_each_safe(pos, tmp, &head) fy_list_del(pos);
    FY_ASSERT(fy_list_is_empty(&head));
    for (int i = 0; i < 10; i++)
        FY_ASSERT(!fy_list_is_linked(&it[i].link));
}

static void container_of_works(void)
{
    item_t it = {.v = 42};
    fy_list_t *l = &it.link;
    fy_qelem_t *q = &it.q;
    FY_ASSERT(fy_container_of(l, item_t, link) == &it);
    FY_ASSERT(fy_container_of(q, item_t, q) == &it);
}

static void queue_fifo(void)
{
    fy_queue_t q;
    item_t it[6];
    fy_queue_init(&q);
    FY_ASSERT(fy_queue_is_empty(&q));
    FY_ASSERT(fy_queue_pop(&q) == NULL);
    FY_ASSERT(fy_queue_peek(&q) == NULL);
    for (int i = 0; i < 6; i++)
        it[i].v = i;
    fy_queue_push(&q, &it[1].q);
    fy_queue_push(&q, &it[2].q);
    fy_queue_push_head(&q, &it[0].q);
    FY_ASSERT(fy_queue_peek(&q) == &it[0].q);
    for (int i = 0; i < 3; i++) {
        fy_qelem_t *e = fy_queue_pop(&q);
        FY_ASSERT(e != NULL);
        FY_ASSERT_EQ(fy_container_of(e, item_t, q)->v, i);
    }
    FY_ASSERT(fy_queue_is_empty(&q));
    /* After draining, the tail pointer must be reset: a push then pop still works. */
    fy_queue_push(&q, &it[3].q);
    fy_queue_push(&q, &it[4].q);
    FY_ASSERT(fy_queue_pop(&q) == &it[3].q);
    FY_ASSERT(fy_queue_pop(&q) == &it[4].q);
    FY_ASSERT(fy_queue_pop(&q) == NULL);
    /* push_head on an empty queue sets the tail: a later push goes after it. */
    fy_queue_push_head(&q, &it[5].q);
    fy_queue_push(&q, &it[0].q);
    FY_ASSERT(fy_queue_pop(&q) == &it[5].q);
    FY_ASSERT(fy_queue_pop(&q) == &it[0].q);
    FY_ASSERT(fy_queue_is_empty(&q));
}

FYTEST_MAIN(FYTEST_CASE(list_basic), FYTEST_CASE(list_safe_removal),
            FYTEST_CASE(container_of_works), FYTEST_CASE(queue_fifo))
