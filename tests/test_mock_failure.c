/* A failure raised inside the mock while it holds its lock ends the test
 * as a failure, not a hang: cmocka jumps out of the test with the lock
 * held, and the teardown gives it back before it drains the streams. Meson
 * expects this program to fail (should_fail) within a short timeout; a
 * teardown that waited on the lock would time out instead. */
#include "mock_fixture.h"

#include "mock/mock_internal.h"

static void test_failure_with_the_lock_held(void **state)
{
    (void)state;
    memra_engine *eng = mock_engine();
    memra_engine_destroy(eng);
    pthread_mutex_lock(&mu); /* as execute() holds it while a host kernel runs */
    fail_msg("%s", "raised with the mock's lock held: this test is expected to fail, not hang");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_failure_with_the_lock_held, mock_setup, mock_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
