import { PageHeader } from '../ui';

export function Webhooks() {
  return <PageHeader title="Webhooks" />;
}
