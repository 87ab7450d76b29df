import { PageHeader } from '../ui';

export function Members() {
  return <PageHeader title="Members" />;
}
