import { describe, expect, it } from 'vitest'
import { mount } from '@vue/test-utils'
import BookingWarnings from './BookingWarnings.vue'

const warning = {
  gpu_uuid: 'GPU-1', host: 'sim-001', gpu_index: 2,
  processes: [{ pid: 4242, user: 'bob', command: 'python squat.py' }, { pid: 7, user: null, command: 'a.out' }],
  message: 'sim-001:2 is in use now by bob: ...',
}

describe('BookingWarnings', () => {
  it('names the GPU, who and which processes, and can be dismissed', async () => {
    const view = mount(BookingWarnings, { props: { warnings: [warning] } })
    const text = view.text()
    expect(text).toContain('in use right now')
    expect(text).toContain('sim-001:2')
    expect(text).toContain('bob runs python squat.py (pid 4242)')
    expect(text).toContain('an unknown user runs a.out (pid 7)')
    await view.find('button').trigger('click')
    expect(view.emitted('dismiss')).toHaveLength(1)
  })

  it('shows nothing when there is nothing to say', () => {
    const view = mount(BookingWarnings, { props: { warnings: [] } })
    expect(view.find('[data-testid="booking-warnings"]').exists()).toBe(false)
  })
})
